// Monitor: where training scalars go besides metrics.jsonl — TensorBoard event
// files (tensorboard_monitor.h), CSV files (csv_monitor.h), or several at once
// (monitor_fanout.h). DeepSpeed's monitor interface in C++: a batch of events,
// each a (tag, value, step) triple; like DeepSpeed the step is the number of
// samples trained so far, so runs with different batch sizes line up.
//
//   auto monitor = tessera::runtime::make_monitor(cfg.monitor, rank);  // rank 0 writes
//   monitor->write_events({{"Train/Samples/train_loss", loss, step * cfg.train_batch_size}});
//
// Not thread-safe: one owner calls it from one thread. Writes are buffered;
// flush() (and the destructor) pushes them to the files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::runtime {

struct MonitorEvent {
  std::string tag;  // "Train/Samples/train_loss": '/' groups the scalars in TensorBoard
  double value = 0;
  int64_t step = 0;  // samples trained so far (DeepSpeed's global_samples)
};

class Monitor {
 public:
  virtual ~Monitor() = default;
  // Appends the events, in order. Throws tessera::Error naming the file when a
  // write fails (a full disk must not go unnoticed until the end of a run).
  virtual void write_events(const std::vector<MonitorEvent>& events) = 0;
  // Makes everything written so far visible to readers (TensorBoard, a CSV
  // viewer) without closing the files; throws like write_events.
  virtual void flush() = 0;
};

}  // namespace tessera::runtime
