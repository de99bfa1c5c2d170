// Observability: what a training run records beyond its metrics, as the config
// asks (docs/observability.md):
//  - the timeline ("timeline" section, or TESSERA_TIMELINE=DIR): core/trace.h
//    recording with every communication op on it (comm/comm_trace.h);
//  - the comms logger ("comms_logger" section): comm/comms_logger.h.
// The Engine owns one; other trainers (the model-parallel engine, tessera
// train) may own their own.
//
// One timeline per process: when one is already recording (ranks as threads of
// one process), this object leaves it to its owner and records nothing itself.
//
// Thread safety: not shared between threads (comm_summary() may be called from any).
#pragma once

#include <memory>
#include <string>

#include "tessera/comm/comms_logger.h"
#include "tessera/runtime/config.h"

namespace tessera::comm {
class CommTrace;
}

namespace tessera::runtime {

class Observability {
 public:
  // `rank` and `world` are global (the timeline's track per rank).
  // `default_dir`: the timeline directory when neither the config's output_path
  // nor TESSERA_TIMELINE names one ("timeline" if empty).
  Observability(const Config& config, int rank, int world, const std::string& default_dir = "");
  ~Observability();  // finish_timeline()
  Observability(const Observability&) = delete;
  Observability& operator=(const Observability&) = delete;

  // Whether this object's timeline is recording.
  bool timeline_on() const { return owns_timeline_; }
  // Writes this rank's trace; on rank 0 waits for the others' and writes the
  // merged timeline.json, whose path it returns ("" elsewhere or when off).
  // Idempotent.
  std::string finish_timeline();

  // The comms logger, or null when comms_logger is off.
  comm::CommsLogger* comms_logger() { return comms_logger_.get(); }
  // Its summary; empty when the logger is off.
  comm::CommSummary comm_summary() const;

 private:
  int rank_;
  bool owns_timeline_ = false;
  std::unique_ptr<comm::CommTrace> comm_trace_;
  std::unique_ptr<comm::CommsLogger> comms_logger_;
};

}  // namespace tessera::runtime
