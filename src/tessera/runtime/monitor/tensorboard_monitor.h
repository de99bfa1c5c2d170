// TensorBoardMonitor: writes scalars to a TensorBoard event file, which
// `tensorboard --logdir OUTPUT_PATH` shows under the Scalars tab.
//
// One file per monitor, log_dir/events.out.tfevents.<unix time>.<host>.<pid>.<n>
// (the name TensorBoard globs for), TFRecord-framed (tfrecord.h) Event protocol
// buffers: a file_version record first, then one Event per scalar with the
// event's step and a float simple_value (TensorBoard stores scalars as float32).
// Resuming a run starts a new file in the same directory; TensorBoard merges them.
// Not thread-safe; see monitor.h.
#pragma once

#include <memory>
#include <string>

#include "tessera/runtime/monitor/monitor.h"

namespace tessera::runtime {

class MonitorFile;

class TensorBoardMonitor : public Monitor {
 public:
  // Creates log_dir (with parents) and the event file; tessera::Error naming the
  // path when either cannot be created.
  explicit TensorBoardMonitor(const std::string& log_dir);
  ~TensorBoardMonitor() override;

  void write_events(const std::vector<MonitorEvent>& events) override;
  void flush() override;
  // The event file's path.
  const std::string& path() const;

 private:
  std::unique_ptr<MonitorFile> file_;
};

}  // namespace tessera::runtime
