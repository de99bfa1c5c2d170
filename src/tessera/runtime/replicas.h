// Replica checks shared by every data-parallel strategy (DDP, ZeRO): all ranks
// must hold the same model, and start from rank 0's values.
//
// Both are collective over `group`; every rank calls them in the same order.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"

namespace tessera::runtime {

// Checks that every rank's module has the same parameters and buffers (names,
// shapes, dtypes, trainable or frozen): one small all_reduce when they agree, a
// ConfigError naming the first difference and the ranks when they do not. `who`
// names the caller in the message ("DistributedDataParallel", "ZeRO").
void verify_replicas_match(const torch::nn::Module& module, comm::ProcessGroup& group,
                           const std::string& who);

// Copies rank 0's values into `tensors` on every rank: large tensors in place, small
// ones batched per dtype (16 MiB at a time), so no full extra copy of a model is made.
void broadcast_from_rank0(const std::vector<at::Tensor>& tensors, comm::ProcessGroup& group);

}  // namespace tessera::runtime
