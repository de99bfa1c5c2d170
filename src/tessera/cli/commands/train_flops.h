// TrainFlops: achieved FLOP/s and MFU for `tessera train`, and the flops
// profiler at the config's flops_profiler.profile_step.
//
// Model FLOPs per optimizer step are counted from the GPT's shapes
// (models/gpt_flops.h: 6Ψ + 12·L·C·T per token; a Llama's: llama_flops.h)
// times the global batch's tokens, and split evenly over the ranks: data parallel ranks each do their
// share of the tokens, tensor and pipeline ranks their share of each token.
// Achieved FLOP/s per rank = those FLOPs / the time train_step took (evaluation
// and checkpoints left out). MFU = achieved / peak per rank, where the peak per
// rank is the per-core fp32 GEMM peak `tessera doctor` recorded
// (runtime/profiling/peak_flops.h) times the intra-op threads of the rank.
// With activation checkpointing HFU adds the recomputed forward.
//
// One per rank; rank 0 prints. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tessera/cli/commands/train_settings.h"
#include "tessera/models/gpt_flops.h"
#include "tessera/runtime/config.h"
#include "tessera/runtime/profiling/flops_profiler.h"
#include "tessera/runtime/profiling/peak_flops.h"

namespace tessera::cli {

class TrainFlops {
 public:
  // After the backend is built (it sets the rank's threads). ConfigError when
  // TESSERA_PEAK_FLOPS or the peak record is malformed.
  TrainFlops(const runtime::Config& cfg, const TrainSettings& s, int world, bool rank0);

  // Rank 0: the FLOPs per token and the peak in use, or how to record one.
  void print_startup(int64_t first_step) const;

  // Around each backend->train_step(): times the step, and profiles the first
  // forward of step flops_profiler.profile_step (rank 0), printing the table
  // (or writing output_file) once the step is done.
  void before_step(int64_t next_step);
  void after_step(int64_t step);

  // For the progress line: adds "tflops" (achieved TFLOP/s of this rank), and
  // "mfu" (and "hfu" with activation checkpointing) when a peak is known, over
  // the steps since the last call; returns " | 0.0213 TFLOP/s | MFU 36.7%".
  std::string annotate(nlohmann::json& record);

  // Rank 0: the whole run's achieved FLOP/s and MFU.
  void print_summary() const;

  double peak_flops_per_rank() const { return peak_per_rank_; }  // 0: unknown

 private:
  using Clock = std::chrono::steady_clock;
  void report_profile(int64_t step);

  runtime::FlopsProfilerConfig profiler_config_;
  models::GPTFlopCount count_;
  int64_t seq_len_, micro_batch_;
  double model_flops_per_step_;     // per rank
  double hardware_flops_per_step_;  // per rank, recompute included
  bool checkpointing_;
  bool rank0_;
  int threads_;
  std::optional<runtime::profiling::PeakFlops> peak_;
  double peak_per_rank_ = 0;
  Clock::time_point step_start_;
  double window_seconds_ = 0, total_seconds_ = 0;
  int64_t window_steps_ = 0, total_steps_ = 0;
  std::unique_ptr<runtime::profiling::FlopsProfiler> profiler_;
};

}  // namespace tessera::cli
