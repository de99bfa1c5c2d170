// Learning-rate schedules with DeepSpeed's names, formulas and timing.
//
// DeepSpeed builds its scheduler at last_batch_iteration -1, which sets the lr of
// the first optimizer step, and advances it by one after every optimizer step.
// So the optimizer step that follows `steps` completed steps runs at iteration
// steps - 1: step 1 at iteration -1, step 2 at iteration 0, step k at k - 2.
// Engine::lr() and metrics.jsonl's "lr" are the lr of that next step.
//
//   WarmupLR        iteration -1: warmup_min_lr; then warmup_min_lr + (warmup_max_lr
//                   - warmup_min_lr) * gamma, gamma = log(it + 1) / log(W) ("log") or
//                   it / W ("linear") while it < W, then 1; W = max(2, warmup_num_steps).
//   WarmupDecayLR   as WarmupLR, then gamma = max(0, (T - it) / max(1, T - W)):
//                   linear decay to 0 at T = total_num_steps.
//   WarmupCosineLR  a ratio of each parameter group's own lr: 0 at iteration -1;
//                   warmup_min_ratio + (1 - warmup_min_ratio) * gamma while it < W;
//                   then cos_min_ratio + (1 - cos_min_ratio) * (1 + cos(pi * (it - W + 1)
//                   / (T - W))) / 2, never below 0.
//   "" (none)       the optimizer's own lr, untouched.
// WarmupLR and WarmupDecayLR set the same lr on every parameter group, as
// DeepSpeed does; WarmupCosineLR scales each group's lr.
//
// A value type: immutable after construction, safe to share between threads.
#pragma once

#include <cstdint>

#include "tessera/runtime/config.h"

namespace tessera::runtime {

class LrSchedule {
 public:
  explicit LrSchedule(SchedulerConfig config);

  // False without a scheduler: the engine leaves the optimizer's lr alone.
  bool active() const { return !config_.type.empty(); }
  // DeepSpeed's last_batch_iteration for the step after `steps` completed steps.
  static int64_t iteration_after(int64_t steps) { return steps - 1; }
  // The lr of a parameter group whose own lr is `group_lr`, at `iteration` (>= -1).
  double lr_at(int64_t iteration, double group_lr) const;
  const SchedulerConfig& config() const { return config_; }

 private:
  // Warmup progress in [0, 1] at iteration `it` >= 0 (1 after the warmup).
  double warmup_gamma(int64_t it) const;
  int64_t warmup_steps() const;

  SchedulerConfig config_;
};

}  // namespace tessera::runtime
