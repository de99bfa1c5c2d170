#include "tessera/runtime/lr_schedules.h"

#include <algorithm>
#include <cmath>

namespace tessera::runtime {

LrSchedule::LrSchedule(SchedulerConfig config, double base_lr)
    : config_(std::move(config)), base_lr_(base_lr) {}

double LrSchedule::warmup_gamma(int64_t step) const {
  const int64_t n = config_.warmup_num_steps;
  if (step >= n) return 1.0;
  if (config_.warmup_type == "linear") return static_cast<double>(step) / n;
  // DeepSpeed's log warmup: log(step + 1) / log(n), with n >= 2 so log(n) > 0.
  const double denom = std::log(static_cast<double>(std::max<int64_t>(n, 2)));
  return std::min(1.0, std::log(static_cast<double>(step + 1)) / denom);
}

double LrSchedule::lr_at(int64_t step) const {
  const auto& c = config_;
  if (c.type.empty()) return base_lr_;
  if (c.type == "WarmupCosineLR") {
    if (step < c.warmup_num_steps) {
      return base_lr_ * (c.warmup_min_ratio + (1.0 - c.warmup_min_ratio) * warmup_gamma(step));
    }
    const double span = static_cast<double>(std::max<int64_t>(1, c.total_num_steps - c.warmup_num_steps));
    const double progress = std::min(1.0, (step - c.warmup_num_steps) / span);
    const double ratio = 0.5 * (1.0 + std::cos(M_PI * progress)) * (1.0 - c.cos_min_ratio) +
                         c.cos_min_ratio;
    return base_lr_ * ratio;
  }
  const double warm = c.warmup_min_lr + (c.warmup_max_lr - c.warmup_min_lr) * warmup_gamma(step);
  if (c.type == "WarmupLR" || step < c.warmup_num_steps) return warm;
  // WarmupDecayLR: linear decay from warmup_max_lr to 0 at total_num_steps.
  const double span = static_cast<double>(std::max<int64_t>(1, c.total_num_steps - c.warmup_num_steps));
  const double gamma = std::max(0.0, (c.total_num_steps - step) / span);
  return c.warmup_max_lr * gamma;
}

}  // namespace tessera::runtime
