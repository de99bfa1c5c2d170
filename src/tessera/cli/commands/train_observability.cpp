#include "tessera/cli/commands/train_observability.h"

#include <cstdio>

#include "tessera/core/env.h"

namespace tessera::cli {

void default_timeline_dir(runtime::Config& cfg, const std::string& out_dir) {
  if (cfg.timeline.enabled && cfg.timeline.output_path.empty()) {
    cfg.timeline.output_path = out_dir + "/timeline";
  }
}

TrainObservability::TrainObservability(TrainBackend& backend)
    : backend_(backend), counters_at_start_(backend.comm_stats()) {
  if (auto* logger = backend_.observability().comms_logger()) logger->reset();
}

void TrainObservability::report() {
  runtime::Observability& obs = backend_.observability();
  const bool rank0 = backend_.rank() == 0;
  if (obs.comms_logger() && rank0) {
    const comm::CommSummary summary = obs.comm_summary();
    const comm::CommStats counted =
        comm::CommStats::difference(backend_.comm_stats(), counters_at_start_);
    std::printf("comms logger (rank 0, every group):\n%s", summary.table().c_str());
    std::printf("comms logger totals: %llu ops, %llu bytes sent; comm counters (world group): "
                "%llu ops, %llu bytes sent\n",
                static_cast<unsigned long long>(summary.total_count),
                static_cast<unsigned long long>(summary.total_wire_bytes),
                static_cast<unsigned long long>(counted.total_calls()),
                static_cast<unsigned long long>(counted.total_bytes()));
  }
  const bool timeline = obs.timeline_on();
  const std::string merged = obs.finish_timeline();
  if (timeline && rank0 && !merged.empty()) std::printf("timeline: %s\n", merged.c_str());
  std::fflush(stdout);
}

}  // namespace tessera::cli
