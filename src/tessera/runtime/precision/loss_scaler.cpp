#include "tessera/runtime/precision/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "tessera/core/check.h"

namespace tessera::runtime::precision {

LossScaler::LossScaler(LossScalerOptions options) : options_(options) {
  TS_CHECK_T(ConfigError, options_.loss_scale >= 0, "config 'fp16.loss_scale' must be >= 0 "
             "(0: dynamic), got ", options_.loss_scale);
  TS_CHECK_T(ConfigError, options_.initial_scale_power >= 0 && options_.initial_scale_power <= 64,
             "config 'fp16.initial_scale_power' must be in [0, 64], got ",
             options_.initial_scale_power);
  TS_CHECK_T(ConfigError, options_.loss_scale_window >= 1,
             "config 'fp16.loss_scale_window' must be >= 1, got ", options_.loss_scale_window);
  TS_CHECK_T(ConfigError, options_.hysteresis >= 1, "config 'fp16.hysteresis' must be >= 1, got ",
             options_.hysteresis);
  TS_CHECK_T(ConfigError, options_.min_loss_scale > 0,
             "config 'fp16.min_loss_scale' must be > 0, got ", options_.min_loss_scale);
  scale_ = dynamic() ? std::ldexp(1.0, options_.initial_scale_power) : options_.loss_scale;
  hysteresis_left_ = options_.hysteresis;
}

bool LossScaler::update(bool overflow) {
  const double before = scale_;
  if (overflow) {
    const bool at_floor = !dynamic() || scale_ <= options_.min_loss_scale;
    overflows_at_minimum_ = at_floor ? overflows_at_minimum_ + 1 : 0;
    TS_CHECK(overflows_at_minimum_ < options_.loss_scale_window,
               "fp16: the gradients overflowed (inf or nan) on ", overflows_at_minimum_,
               " consecutive steps at the ", dynamic() ? "minimum" : "static", " loss scale ",
               scale_, "; training cannot make progress. Lower the learning rate, check the "
               "data and model for values that overflow float16, or train with bf16");
    if (dynamic()) {
      if (hysteresis_left_ <= 1) {
        scale_ = std::max(scale_ / 2, options_.min_loss_scale);
      } else {
        --hysteresis_left_;
      }
    }
    last_overflow_iteration_ = iteration_;
  } else {
    overflows_at_minimum_ = 0;
    if (dynamic()) {
      if (options_.consecutive_hysteresis) hysteresis_left_ = options_.hysteresis;
      if ((iteration_ - last_overflow_iteration_) % options_.loss_scale_window == 0) {
        if (!options_.consecutive_hysteresis) hysteresis_left_ = options_.hysteresis;
        scale_ *= 2;
      }
    }
  }
  ++iteration_;
  return scale_ != before;
}

nlohmann::json LossScaler::state() const {
  return {{"scale", scale_},
          {"hysteresis_left", hysteresis_left_},
          {"iteration", iteration_},
          {"last_overflow_iteration", last_overflow_iteration_},
          {"overflows_at_minimum", overflows_at_minimum_}};
}

void LossScaler::load_state(const nlohmann::json& s) {
  scale_ = s.value("scale", scale_);
  hysteresis_left_ = s.value("hysteresis_left", hysteresis_left_);
  iteration_ = s.value("iteration", iteration_);
  last_overflow_iteration_ = s.value("last_overflow_iteration", last_overflow_iteration_);
  overflows_at_minimum_ = s.value("overflows_at_minimum", overflows_at_minimum_);
}

}  // namespace tessera::runtime::precision
