// How `tessera plan` shows its answer: a table for people (layouts ranked by
// predicted throughput, those that do not fit marked) and the same as JSON for
// scripts (--json). Memory is in GB of 10^9 bytes, as the ZeRO paper counts.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "tessera/cli/plan/layout_search.h"
#include "tessera/cli/plan/plan_problem.h"
#include "tessera/cli/plan/training_cost.h"

namespace tessera::cli::plan {

struct PlanReport {
  PlanProblem problem;
  std::vector<Candidate> shown;         // in rank order
  int considered = 0;                   // layouts weighed in all
  int fitting = 0;                      // of which fit
  std::optional<TrainingCost> cost;     // of the best fitting layout
  std::optional<Candidate> costed;      // that layout
};

// Picks what to show from `ranked` (sorted by throughput): the first `top`
// layouts that fit, and at most `max_oom` of those that do not fit but are
// faster than every one that does (max_oom < 0: every one, wherever it ranks).
PlanReport make_report(const PlanProblem& problem, const std::vector<Candidate>& ranked, int top,
                       int max_oom);

void print_report(std::FILE* out, const PlanReport& report);
nlohmann::json report_json(const PlanReport& report);

}  // namespace tessera::cli::plan
