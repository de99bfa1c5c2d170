// Time and money to train `tokens` (or `steps`) with one layout, on demand and
// on preemptible (spot) machines.
//
// On demand: steps x step time, times devices x price per device-hour.
// Spot, with preemptions at rate λ (per second, from --preemptions-per-day), a
// checkpoint of C seconds every τ seconds of work and R seconds to restart:
// each preemption loses on average the work since the last checkpoint (τ/2)
// plus the restart, and checkpoints add C/τ, so the expected wall time is
//   T = W (1 + C/τ) / (1 - λ (τ/2 + R)),
// finite only while λ(τ/2 + R) < 1. The default τ is Young's optimum
// sqrt(2 C / λ), which minimizes it to first order. The price is discounted by
// --spot-discount. Pure functions.
#pragma once

#include <vector>

namespace tessera::cli::plan {

struct CostInputs {
  double tokens_per_step = 0;
  double step_seconds = 0;
  int devices = 0;
  double tokens = 0;  // to train; or
  double steps = 0;   // steps to train (used when tokens == 0)
  double price_per_device_hour = 0;
  double spot_discount = 0;        // 0.7: spot costs 30% of on demand
  double preemptions_per_day = 0;  // for the whole job
  double checkpoint_seconds = 0;   // C
  double restart_seconds = 600;    // R
  double checkpoint_interval = 0;  // τ in seconds of work; 0: Young's optimum
};

struct SpotEstimate {
  double checkpoint_interval = 0;  // τ, seconds
  double seconds = 0;              // expected wall time (inf: never finishes)
  double cost = 0;
  double preemptions = 0;          // expected number over the run
  double lost_per_preemption = 0;  // τ/2 + R, seconds
};

struct TrainingCost {
  double steps = 0;
  double seconds = 0;  // on demand, no failures
  double cost = 0;
  bool spot = false;
  double checkpoint_seconds = 0;  // the inputs used, for the report
  double restart_seconds = 0;
  double preemptions_per_day = 0;
  SpotEstimate chosen;               // at the given or optimal interval
  std::vector<SpotEstimate> others;  // at other intervals, to choose from
};

// ConfigError on inconsistent inputs (no tokens or steps, negative rates).
TrainingCost estimate_training_cost(const CostInputs& in);

// Expected spot wall time and cost at checkpoint interval `tau` seconds.
SpotEstimate spot_at_interval(const CostInputs& in, double work_seconds, double tau);

}  // namespace tessera::cli::plan
