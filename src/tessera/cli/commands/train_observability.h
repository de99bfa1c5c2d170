// What `tessera train` prints and writes of the run's observability
// (runtime/observability.h, docs/observability.md): the timeline's directory
// defaults to <out_dir>/timeline, and at the end rank 0 prints the comms
// logger's table with its totals next to the communication counters' for the
// same window, then every rank closes the timeline and rank 0 names the merged
// trace.
#pragma once

#include <string>

#include "tessera/cli/commands/train_backend.h"
#include "tessera/comm/comm_stats.h"
#include "tessera/runtime/config.h"

namespace tessera::cli {

// <out_dir>/timeline when the config turns the timeline on without a directory.
void default_timeline_dir(runtime::Config& cfg, const std::string& out_dir);

// Opened once the backend is built: starts the comms logger's window and the
// counters' at the same moment, so their totals can be compared at the end.
class TrainObservability {
 public:
  explicit TrainObservability(TrainBackend& backend);
  // At the end of training, on every rank (rank 0 waits for the others' traces).
  void report();

 private:
  TrainBackend& backend_;
  comm::CommStats counters_at_start_;
};

}  // namespace tessera::cli
