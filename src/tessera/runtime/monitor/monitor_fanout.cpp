#include "tessera/runtime/monitor/monitor_fanout.h"

#include "tessera/runtime/monitor/csv_monitor.h"
#include "tessera/runtime/monitor/tensorboard_monitor.h"

namespace tessera::runtime {

void MonitorFanout::add(std::unique_ptr<Monitor> monitor) {
  monitors_.push_back(std::move(monitor));
}

void MonitorFanout::write_events(const std::vector<MonitorEvent>& events) {
  for (auto& m : monitors_) m->write_events(events);
}

void MonitorFanout::flush() {
  for (auto& m : monitors_) m->flush();
}

std::unique_ptr<MonitorFanout> make_monitor(const MonitorConfig& config, int rank,
                                            const std::string& default_dir) {
  auto fanout = std::make_unique<MonitorFanout>();
  // One writer per job: every rank holds the same (averaged) scalars.
  if (rank != 0) return fanout;
  if (config.tensorboard.enabled) {
    fanout->add(std::make_unique<TensorBoardMonitor>(config.tensorboard.log_dir(default_dir)));
  }
  if (config.csv_monitor.enabled) {
    fanout->add(std::make_unique<CsvMonitor>(config.csv_monitor.log_dir(default_dir)));
  }
  return fanout;
}

}  // namespace tessera::runtime
