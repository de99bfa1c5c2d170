// MonitorFanout: hands every event to each of several monitors (DeepSpeed's
// MonitorMaster), and make_monitor(), which builds the ones a config enables.
//
// Like DeepSpeed, only rank 0 writes: on every other rank make_monitor() returns
// an empty fan-out, so training code calls write_events() on every rank without
// checking its rank. Building it creates the directories and files, so an
// unwritable output_path fails at startup, not at the first log line.
// Not thread-safe; see monitor.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/runtime/monitor/monitor.h"
#include "tessera/runtime/monitor/monitor_config.h"

namespace tessera::runtime {

class MonitorFanout : public Monitor {
 public:
  void add(std::unique_ptr<Monitor> monitor);
  // True when no monitor is attached (writes are then free).
  bool empty() const { return monitors_.empty(); }

  // Each monitor in the order added; the first error stops the call.
  void write_events(const std::vector<MonitorEvent>& events) override;
  void flush() override;

 private:
  std::vector<std::unique_ptr<Monitor>> monitors_;
};

// The monitors `config` enables (TensorBoard, CSV) on `rank` 0, none elsewhere.
// Each writes into its section's output_path/job_name, `default_dir` standing in
// for an empty output_path ("" = the current directory). Throws tessera::Error
// when a directory or file cannot be created.
std::unique_ptr<MonitorFanout> make_monitor(const MonitorConfig& config, int rank,
                                            const std::string& default_dir = "");

}  // namespace tessera::runtime
