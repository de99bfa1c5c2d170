#include "tessera/cli/commands/train_flops.h"

#include <ATen/Parallel.h>

#include <cstdio>
#include <fstream>

#include "tessera/core/check.h"
#include "tessera/models/llama_flops.h"
#include "tessera/runtime/profiling/profile_format.h"

namespace tessera::cli {
namespace {

using runtime::profiling::si;

std::string percent(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", 100.0 * ratio);
  return buf;
}

std::string tflops_text(double flops_per_s) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.4g TFLOP/s", flops_per_s / 1e12);
  return buf;
}

}  // namespace

TrainFlops::TrainFlops(const runtime::Config& cfg, const TrainSettings& s, int world, bool rank0)
    : profiler_config_(cfg.flops_profiler),
      count_(s.is_llama() ? models::llama_flop_count(s.llama) : models::gpt_flop_count(s.model)),
      seq_len_(s.model.block_size),
      micro_batch_(cfg.train_micro_batch_size_per_gpu),
      checkpointing_(s.model.activation_checkpoints > 0),
      rank0_(rank0),
      threads_(at::get_num_threads()),
      peak_(runtime::profiling::find_peak_flops()) {
  // Every batch is full blocks of block_size tokens (train_data.h).
  const double tokens_per_rank =
      static_cast<double>(cfg.train_batch_size) * static_cast<double>(seq_len_) / world;
  model_flops_per_step_ = count_.train_flops_per_token(seq_len_) * tokens_per_rank;
  hardware_flops_per_step_ =
      model_flops_per_step_ +
      (checkpointing_ ? count_.recompute_flops_per_token(seq_len_) * tokens_per_rank : 0.0);
  if (peak_) peak_per_rank_ = peak_->flops_per_core * threads_;
}

void TrainFlops::print_startup(int64_t first_step) const {
  if (!rank0_) return;
  std::printf(
      "FLOPs: 6*%lld + 12*L*C*T = %s per token (model FLOPs, Psi = parameters without "
      "wpe), %s per step per rank\n",
      static_cast<long long>(count_.flop_params),
      si(count_.train_flops_per_token(seq_len_), "FLOPs").c_str(),
      si(model_flops_per_step_, "FLOPs").c_str());
  if (!peak_) {
    std::printf(
        "MFU: no peak FLOP/s recorded for this host (%s): run `tessera doctor` once to "
        "measure it, or set TESSERA_PEAK_FLOPS; reporting achieved FLOP/s only\n",
        runtime::profiling::peak_record_path().c_str());
  } else {
    std::printf("MFU: against %s per rank (%s per core x %d threads, from %s)\n",
                si(peak_per_rank_, "FLOP/s").c_str(), si(peak_->flops_per_core, "FLOP/s").c_str(),
                threads_, peak_->source.c_str());
    const std::string host = runtime::profiling::this_host();
    if (!peak_->host.empty() && peak_->host != host) {
      std::printf(
          "MFU: warning: the peak was measured on host %s, this is %s; run `tessera "
          "doctor` here\n",
          peak_->host.c_str(), host.c_str());
    }
  }
  const auto& p = profiler_config_;
  if (p.enabled && p.profile_step <= first_step) {
    std::printf(
        "flops_profiler: profile_step %lld is not after this run's first step %lld: "
        "nothing will be profiled\n",
        static_cast<long long>(p.profile_step), static_cast<long long>(first_step));
  }
  std::fflush(stdout);
}

void TrainFlops::before_step(int64_t next_step) {
  if (rank0_ && profiler_config_.enabled && next_step == profiler_config_.profile_step) {
    profiler_ = std::make_unique<runtime::profiling::FlopsProfiler>();
    profiler_->start();
  }
  step_start_ = Clock::now();
}

void TrainFlops::after_step(int64_t step) {
  const double s = std::chrono::duration<double>(Clock::now() - step_start_).count();
  window_seconds_ += s;
  total_seconds_ += s;
  ++window_steps_;
  ++total_steps_;
  if (profiler_) {
    profiler_->stop();
    report_profile(step);
    profiler_.reset();
  }
}

std::string TrainFlops::annotate(nlohmann::json& record) {
  if (window_steps_ == 0 || window_seconds_ <= 0) return "";
  const double achieved = model_flops_per_step_ * window_steps_ / window_seconds_;
  record["tflops"] = achieved / 1e12;
  std::string text = " | " + tflops_text(achieved);
  if (peak_per_rank_ > 0) {
    record["mfu"] = achieved / peak_per_rank_;
    text += " | MFU " + percent(achieved / peak_per_rank_);
    if (checkpointing_) {
      record["hfu"] = hardware_flops_per_step_ * window_steps_ / window_seconds_ / peak_per_rank_;
    }
  }
  window_seconds_ = 0;
  window_steps_ = 0;
  return text;
}

void TrainFlops::print_summary() const {
  if (!rank0_ || total_steps_ == 0 || total_seconds_ <= 0) return;
  const double achieved = model_flops_per_step_ * total_steps_ / total_seconds_;
  std::printf("FLOPs: %lld steps in %.3g s of train steps: %s per rank",
              static_cast<long long>(total_steps_), total_seconds_, tflops_text(achieved).c_str());
  if (peak_per_rank_ > 0) {
    std::printf(", MFU %s of %s", percent(achieved / peak_per_rank_).c_str(),
                si(peak_per_rank_, "FLOP/s").c_str());
    if (checkpointing_) {
      std::printf(" (HFU %s with the recomputed forward)",
                  percent(hardware_flops_per_step_ * total_steps_ / total_seconds_ / peak_per_rank_)
                      .c_str());
    }
  } else {
    std::printf(" (no peak recorded: run `tessera doctor` for MFU)");
  }
  std::printf("\n");
  std::fflush(stdout);
}

void TrainFlops::report_profile(int64_t step) {
  runtime::profiling::ProfileReportOptions o;
  o.module_depth = profiler_config_.module_depth;
  o.top_modules = profiler_config_.top_modules;
  o.detailed = profiler_config_.detailed;
  o.title = c10::str("flops profiler at step ", step, " (rank 0): one forward of a micro-batch [",
                     micro_batch_, ", ", seq_len_, "]");
  std::string text = profiler_->report(o);
  if (profiler_->complete()) {
    const double expected = count_.forward_matmul_flops(micro_batch_, seq_len_);
    text += "  the GPT's formula for this forward: " + si(expected, "FLOPs") +
            "; a training step (x3 for backward, plus 6 per bias and norm parameter): " +
            si(count_.train_flops_per_token(seq_len_) * micro_batch_ * seq_len_, "FLOPs") +
            " per micro-batch\n";
  }
  if (profiler_config_.output_file.empty()) {
    std::fputs(text.c_str(), stdout);
  } else {
    std::ofstream out(profiler_config_.output_file);
    TS_CHECK_T(ConfigError, out.good(), "cannot write flops_profiler.output_file '",
               profiler_config_.output_file, "'");
    out << text;
    std::printf("flops profiler: step %lld written to %s\n", static_cast<long long>(step),
                profiler_config_.output_file.c_str());
  }
  std::fflush(stdout);
}

}  // namespace tessera::cli
