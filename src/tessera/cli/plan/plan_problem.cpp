#include "tessera/cli/plan/plan_problem.h"

#include "tessera/core/check.h"

namespace tessera::cli::plan {

StateLayout parse_state_layout(const std::string& name) {
  if (name == "tessera") return StateLayout::kTessera;
  if (name == "zero-paper") return StateLayout::kZeroPaper;
  TS_THROW(ConfigError, "unknown --model-states '", name, "'; use tessera or zero-paper");
}

const char* state_layout_name(StateLayout s) {
  return s == StateLayout::kTessera ? "tessera" : "zero-paper";
}

StateBytes state_bytes(StateLayout layout, Precision precision) {
  if (layout == StateLayout::kZeroPaper && precision != Precision::kFp32) {
    return {2.0, 2.0, 12.0};  // fp16 params + fp16 grads + fp32 (master, momentum, variance)
  }
  return {4.0, 4.0, 8.0};  // fp32 params + fp32 grads + fp32 (momentum, variance)
}

void PlanProblem::validate() const {
  model.validate();
  cluster.validate();
  TS_CHECK_T(ConfigError, global_batch > 0, "--global-batch must be positive (got ",
             global_batch, ")");
  TS_CHECK_T(ConfigError, memory_headroom > 0 && memory_headroom <= 1, "memory headroom ",
             memory_headroom, " must be in (0, 1]");
}

std::string Layout::describe() const {
  std::string s = "dp" + std::to_string(dp);
  if (ep > 1) s += " ep" + std::to_string(ep);
  s += " tp" + std::to_string(tp);
  if (cp > 1) s += " cp" + std::to_string(cp);
  s += " pp" + std::to_string(pp);
  if (vp > 1) s += " v" + std::to_string(vp);
  s += " z" + std::to_string(zero) + " mb" + std::to_string(micro_batch) + "x" +
       std::to_string(micro_batches);
  if (offload) s += " offload";
  if (recompute) s += " recompute";
  return s;
}

}  // namespace tessera::cli::plan
