// The rank side of the NCCL GPU tests: checks run inside one rank process that
// tessera::init() joined to the job (started by test_nccl_gpu.cpp or by
// `tessera run`). Each check prints "CHECK <name> PASS|FAIL <detail>" so that
// scripts/gpu-check.sh can summarise, and records a GoogleTest failure.
#pragma once

#include <memory>

#include "tessera/comm/process_group.h"

namespace tessera::testing {

// Every op (all_reduce with each reduce op, broadcast, all_gather in both forms
// with even and uneven shards, reduce_scatter, all_to_all with equal and uneven
// splits, send/recv, barrier) on every supported dtype, checked against values
// computed on the CPU; then stream ordering, non-contiguous tensors, a
// subgroup, a per-device spec group and the error cases.
void run_nccl_collective_checks(comm::ProcessGroup& group);

// all_reduce bus bandwidth of 256 MiB float32 and bfloat16 tensors (prints BW lines).
void run_nccl_bandwidth(comm::ProcessGroup& group);

// Rank 1 joins one all_reduce, then stays silent; rank 0's next all_reduce must
// fail with an error naming the op and its sequence number within the timeout.
void run_nccl_timeout_check(comm::ProcessGroup& group, double timeout_seconds);

}  // namespace tessera::testing
