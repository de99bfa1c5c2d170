#include "tessera/runtime/ddp/comm_hook.h"

#include <ATen/ATen.h>

#include "tessera/core/check.h"

namespace tessera::runtime::ddp {

CommHook parse_comm_hook(const std::string& name) {
  if (name == "none" || name.empty()) return CommHook::kNone;
  if (name == "fp16") return CommHook::kFp16;
  if (name == "bf16") return CommHook::kBf16;
  TS_THROW(ConfigError, "unknown comm hook '", name, "': use none, fp16 or bf16");
}

const char* to_string(CommHook hook) {
  switch (hook) {
    case CommHook::kNone: return "none";
    case CommHook::kFp16: return "fp16";
    case CommHook::kBf16: return "bf16";
  }
  return "?";
}

PendingReduction launch_reduction(comm::ProcessGroup& group, const at::Tensor& flat,
                                  CommHook hook) {
  PendingReduction p;
  if (hook == CommHook::kNone) {
    p.work = group.all_reduce(flat, comm::ReduceOp::kAvg);
    return p;
  }
  const auto dtype = hook == CommHook::kFp16 ? at::kHalf : at::kBFloat16;
  // Divide before compressing: the sum of world_size fp16 values may overflow
  // where their average would not.
  p.compressed = flat.div(static_cast<double>(group.size())).to(dtype);
  p.work = group.all_reduce(p.compressed, comm::ReduceOp::kSum);
  return p;
}

void finish_reduction(PendingReduction& pending, at::Tensor& flat) {
  if (pending.work) pending.work->wait();
  if (pending.compressed.defined()) flat.copy_(pending.compressed);
  pending = PendingReduction{};
}

}  // namespace tessera::runtime::ddp
