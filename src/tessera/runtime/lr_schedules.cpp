#include "tessera/runtime/lr_schedules.h"

#include <algorithm>
#include <cmath>

namespace tessera::runtime {

LrSchedule::LrSchedule(SchedulerConfig config) : config_(std::move(config)) {}

int64_t LrSchedule::warmup_steps() const {
  // DeepSpeed clamps to 2 so that log(W) > 0, for the linear warmup too.
  return std::max<int64_t>(2, config_.warmup_num_steps);
}

double LrSchedule::warmup_gamma(int64_t it) const {
  const int64_t w = warmup_steps();
  if (it >= w) return 1.0;
  if (config_.warmup_type == "linear") return static_cast<double>(it) / static_cast<double>(w);
  return std::log(static_cast<double>(it + 1)) / std::log(static_cast<double>(w));
}

double LrSchedule::lr_at(int64_t it, double group_lr) const {
  const auto& c = config_;
  if (c.type.empty()) return group_lr;
  const int64_t w = warmup_steps();
  if (c.type == "WarmupCosineLR") {
    if (it < 0) return 0.0;
    if (it < w) return group_lr * (c.warmup_min_ratio + (1.0 - c.warmup_min_ratio) * warmup_gamma(it));
    // DeepSpeed divides by (T - W); a schedule with T <= W has no cosine phase.
    const double span = static_cast<double>(c.total_num_steps - w);
    const double progress = span > 0 ? static_cast<double>(it - w + 1) / span : 1.0;
    const double ratio = c.cos_min_ratio + (1.0 - c.cos_min_ratio) * (1.0 + std::cos(M_PI * progress)) / 2;
    return group_lr * std::max(0.0, ratio);
  }
  if (it < 0) return c.warmup_min_lr;
  double gamma = warmup_gamma(it);
  if (c.type == "WarmupDecayLR" && it >= w) {
    const double span = std::max(1.0, static_cast<double>(c.total_num_steps - w));
    gamma = std::max(0.0, static_cast<double>(c.total_num_steps - it) / span);
  }
  return c.warmup_min_lr + (c.warmup_max_lr - c.warmup_min_lr) * gamma;
}

}  // namespace tessera::runtime
