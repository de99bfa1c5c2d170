// The layouts `tessera plan` weighs: every split of the cluster's devices into
// dp x tp x cp x pp that Tessera can run (tp inside a node dividing the heads,
// the hidden size and the vocabulary; cp splitting the sequence into 2·cp
// chunks; pp dividing the layers; v chunks dividing each stage's layers; ZeRO
// 0-3 with data parallelism only, ZeRO 0-1 with tensor, context, pipeline or
// expert parallelism, as the engines allow; for an MoE model every ep dividing
// dp and the experts), each micro-batch dividing the replica's
// batch, with and without offload and recomputation. Offload, recomputation and
// context parallelism are kept only where no layout without them fits ("worth
// trying"), unless the filter asks for them.
// Pure functions.
#pragma once

#include <optional>
#include <vector>

#include "tessera/cli/plan/memory_model.h"
#include "tessera/cli/plan/plan_problem.h"
#include "tessera/cli/plan/step_time_model.h"

namespace tessera::cli::plan {

// Pins some dimensions of the search (from --dp, --tp, ...); unset: any.
struct LayoutFilter {
  std::optional<int> dp, tp, pp, vp, zero, cp, ep;
  std::optional<int64_t> micro_batch;
  std::optional<bool> offload, recompute;
};

struct Candidate {
  Layout layout;
  MemoryEstimate memory;
  StepTime time;
  double tokens_per_second = 0;
  // Model FLOPs over the time the devices' peaks would need: MFU of the step.
  double step_mfu = 0;
};

// Every layout worth trying, sorted by predicted throughput (highest first).
std::vector<Candidate> search_layouts(const PlanProblem& problem, const LayoutFilter& filter);

// One layout's prediction.
Candidate evaluate(const PlanProblem& problem, const Layout& layout);

}  // namespace tessera::cli::plan
