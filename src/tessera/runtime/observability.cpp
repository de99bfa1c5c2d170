#include "tessera/runtime/observability.h"

#include "tessera/comm/comm_trace.h"
#include "tessera/core/env.h"
#include "tessera/core/trace.h"

namespace tessera::runtime {

Observability::Observability(const Config& config, int rank, int world,
                             const std::string& default_dir)
    : rank_(rank) {
  const auto env_dir = env::get("TESSERA_TIMELINE");
  if ((config.timeline.enabled || env_dir) && !trace::enabled()) {
    std::string dir = env_dir ? *env_dir : config.timeline.output_path;
    if (dir.empty()) dir = default_dir.empty() ? "timeline" : default_dir;
    trace::start(dir, rank, world);
    owns_timeline_ = true;
    comm_trace_ = std::make_unique<comm::CommTrace>(rank);
  }
  if (config.comms_logger.enabled) {
    comm::CommsLoggerOptions o;
    o.enabled = true;
    o.verbose = config.comms_logger.verbose;
    o.prof_all = config.comms_logger.prof_all;
    o.prof_ops = config.comms_logger.prof_ops;
    comms_logger_ = std::make_unique<comm::CommsLogger>(o, rank);
  }
}

Observability::~Observability() { finish_timeline(); }

std::string Observability::finish_timeline() {
  if (!owns_timeline_) return "";
  owns_timeline_ = false;
  comm_trace_.reset();
  const std::string path = trace::finish();
  return rank_ == 0 ? path : "";
}

comm::CommSummary Observability::comm_summary() const {
  return comms_logger_ ? comms_logger_->summary() : comm::CommSummary{};
}

}  // namespace tessera::runtime
