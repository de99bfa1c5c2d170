#include "tessera/cli/plan/training_cost.h"

#include <cmath>
#include <limits>

#include "tessera/core/check.h"

namespace tessera::cli::plan {

SpotEstimate spot_at_interval(const CostInputs& in, double work_seconds, double tau) {
  SpotEstimate e;
  e.checkpoint_interval = tau;
  const double lambda = in.preemptions_per_day / 86400.0;
  e.lost_per_preemption = tau / 2.0 + in.restart_seconds;
  const double survive = 1.0 - lambda * e.lost_per_preemption;
  const double overhead = tau > 0 ? 1.0 + in.checkpoint_seconds / tau : 1.0;
  e.seconds = survive > 0 ? work_seconds * overhead / survive
                          : std::numeric_limits<double>::infinity();
  e.preemptions = lambda * e.seconds;
  e.cost = e.seconds / 3600.0 * in.devices * in.price_per_device_hour * (1.0 - in.spot_discount);
  return e;
}

TrainingCost estimate_training_cost(const CostInputs& in) {
  TS_CHECK_T(ConfigError, in.tokens > 0 || in.steps > 0,
             "time to train needs --tokens or --steps");
  TS_CHECK_T(ConfigError, in.step_seconds > 0 && in.tokens_per_step > 0 && in.devices > 0,
             "time to train needs a positive step time, batch and device count");
  TS_CHECK_T(ConfigError, in.spot_discount >= 0 && in.spot_discount < 1, "--spot-discount ",
             in.spot_discount, " must be in [0, 1) (0.7 = spot costs 30% of on demand)");
  TS_CHECK_T(ConfigError, in.preemptions_per_day >= 0 && in.restart_seconds >= 0 &&
                              in.checkpoint_seconds >= 0 && in.checkpoint_interval >= 0,
             "--preemptions-per-day, --restart-minutes, --checkpoint-seconds and "
             "--checkpoint-interval-minutes must not be negative");
  TrainingCost t;
  t.steps = in.tokens > 0 ? std::ceil(in.tokens / in.tokens_per_step) : in.steps;
  t.seconds = t.steps * in.step_seconds;
  t.cost = t.seconds / 3600.0 * in.devices * in.price_per_device_hour;
  t.spot = in.preemptions_per_day > 0 || in.spot_discount > 0;
  t.checkpoint_seconds = in.checkpoint_seconds;
  t.restart_seconds = in.restart_seconds;
  t.preemptions_per_day = in.preemptions_per_day;
  if (!t.spot) return t;
  double tau = in.checkpoint_interval;
  if (tau <= 0) {
    // Young (1974): τ* = sqrt(2 C MTBF), MTBF = 1/λ.
    const double lambda = in.preemptions_per_day / 86400.0;
    tau = lambda > 0 && in.checkpoint_seconds > 0 ? std::sqrt(2.0 * in.checkpoint_seconds / lambda)
                                                  : 3600.0;
  }
  t.chosen = spot_at_interval(in, t.seconds, tau);
  for (double minutes : {10.0, 30.0, 60.0, 120.0, 240.0}) {
    t.others.push_back(spot_at_interval(in, t.seconds, minutes * 60.0));
  }
  return t;
}

}  // namespace tessera::cli::plan
