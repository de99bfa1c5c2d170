// Communication hooks: how one gradient bucket is reduced across data-parallel
// ranks. kNone all-reduces the float bucket with AVG; kFp16 / kBf16 compress it to
// a 16-bit copy (pre-divided by the world size so the sum cannot overflow fp16),
// all-reduce that with SUM and copy the result back, halving the bytes on the wire
// at the cost of 16-bit rounding of the averaged gradient.
//
// launch() is asynchronous (returns once the collective is queued on the group);
// finish() blocks until it is done and leaves the average in `flat`. Call both
// from the thread that queues the group's collectives.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "tessera/comm/process_group.h"

namespace tessera::runtime::ddp {

enum class CommHook { kNone, kFp16, kBf16 };

// "none", "fp16", "bf16" (ConfigError naming the choices otherwise).
CommHook parse_comm_hook(const std::string& name);
const char* to_string(CommHook hook);

// One in-flight bucket reduction.
struct PendingReduction {
  comm::WorkHandle work;
  at::Tensor compressed;  // the 16-bit copy on the wire (undefined for kNone)
};

PendingReduction launch_reduction(comm::ProcessGroup& group, const at::Tensor& flat,
                                  CommHook hook);
// Waits (rethrowing the collective's error) and writes the average into `flat`.
void finish_reduction(PendingReduction& pending, at::Tensor& flat);

}  // namespace tessera::runtime::ddp
