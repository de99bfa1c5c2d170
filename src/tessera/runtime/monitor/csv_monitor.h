// CsvMonitor: one CSV file per scalar, laid out as DeepSpeed's csv_monitor writes
// them, so scripts written for those files read these:
//
//   log_dir/Train_Samples_train_loss.csv     (the tag with '/' and ' ' -> '_')
//   step,train_loss                          (header: the tag's last '/' component)
//   8,5.5412249565124512
//
// Rows end in CRLF and fields are quoted only when needed (Python's csv module's
// defaults, RFC 4180); values are written like Python's str(float): the shortest
// digits that read back as the same double. The step is whatever the event
// carries (samples, by convention). Appending to an existing file (a resumed run)
// adds rows without a second header. Not thread-safe; see monitor.h.
#pragma once

#include <map>
#include <string>

#include "tessera/runtime/monitor/monitor.h"
#include "tessera/runtime/monitor/monitor_file.h"

namespace tessera::runtime {

class CsvMonitor : public Monitor {
 public:
  // Creates log_dir (with parents); tessera::Error naming it when it cannot.
  // Files are created on the first event of their tag.
  explicit CsvMonitor(std::string log_dir);

  // tessera::Error for an empty tag (it would name no file).
  void write_events(const std::vector<MonitorEvent>& events) override;
  void flush() override;

  // The file name a tag is written to ("Train/Samples/lr" -> "Train_Samples_lr.csv").
  static std::string file_name(const std::string& tag);
  // The value's text: Python's str(float) ("0.001", "2.0", "1e-05", "nan").
  static std::string format_value(double value);

 private:
  MonitorFile& file_for(const std::string& tag);

  std::string log_dir_;
  std::map<std::string, MonitorFile> files_;  // by file name
};

}  // namespace tessera::runtime
