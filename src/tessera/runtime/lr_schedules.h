// Learning-rate schedules with DeepSpeed's names and formulas, as pure functions
// of the optimizer step (0-based: the lr used by the first step is lr_at(0)).
//
//   WarmupLR        warmup_min_lr -> warmup_max_lr over warmup_num_steps (log or
//                   linear), then constant warmup_max_lr.
//   WarmupDecayLR   as WarmupLR, then linear decay to 0 at total_num_steps.
//   WarmupCosineLR  ratio of the optimizer's lr: warmup_min_ratio -> 1 over the
//                   warmup, then cosine down to cos_min_ratio at total_num_steps.
//   "" (none)       the optimizer's lr throughout.
//
// A value type: immutable after construction, safe to share between threads.
#pragma once

#include <cstdint>

#include "tessera/runtime/config.h"

namespace tessera::runtime {

class LrSchedule {
 public:
  // base_lr: the optimizer's lr (used by WarmupCosineLR and the constant case).
  LrSchedule(SchedulerConfig config, double base_lr);
  double lr_at(int64_t step) const;
  const SchedulerConfig& config() const { return config_; }

 private:
  // Warmup progress in [0, 1] at `step` (1 after the warmup).
  double warmup_gamma(int64_t step) const;

  SchedulerConfig config_;
  double base_lr_;
};

}  // namespace tessera::runtime
