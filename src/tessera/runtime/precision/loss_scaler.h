// LossScaler: fp16 loss scaling with DeepSpeed's rules, so a DeepSpeed "fp16"
// config section behaves the same here.
//
// Dynamic (loss_scale 0): the scale starts at 2^initial_scale_power. After an
// overflow (an inf or nan in any gradient on any rank) the step is skipped and,
// once `hysteresis` overflows have been absorbed, the scale halves, never below
// min_loss_scale. Every loss_scale_window steps without an overflow since the
// last one, the scale doubles. consecutive_hysteresis refills the hysteresis
// budget after every clean step instead of only when the scale grows.
// Static (loss_scale > 0): the scale never changes; overflowing steps are still
// skipped.
//
// A run that overflows on loss_scale_window consecutive steps while the scale is
// already at its minimum (or static) can no longer make progress: update()
// throws a ConfigError saying so, instead of letting training skip forever.
//
// Pure logic, no collectives: the caller decides overflow consistently across
// ranks. Not thread-safe.
#pragma once

#include <cstdint>

#include <nlohmann/json_fwd.hpp>

namespace tessera::runtime::precision {

struct LossScalerOptions {
  double loss_scale = 0;  // 0: dynamic; > 0: this static scale
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
};

class LossScaler {
 public:
  // ConfigError for out-of-range options.
  explicit LossScaler(LossScalerOptions options);

  double scale() const { return scale_; }
  bool dynamic() const { return options_.loss_scale == 0; }
  // Records one optimizer boundary: `overflow` true means the step is skipped.
  // Returns true when the scale changed. Throws tessera::Error when overflow has
  // persisted at the minimum scale for loss_scale_window steps.
  bool update(bool overflow);

  int64_t iterations() const { return iteration_; }
  // Restores or captures the scaler's counters (for checkpoints).
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);

 private:
  LossScalerOptions options_;
  double scale_;
  int hysteresis_left_;
  int64_t iteration_ = 0;
  int64_t last_overflow_iteration_ = -1;
  int64_t overflows_at_minimum_ = 0;  // consecutive overflowing steps at the floor
};

}  // namespace tessera::runtime::precision
