// TrainMonitor: sends `tessera train`'s metrics records (the lines of
// metrics.jsonl) to the monitors the config enables (runtime/monitor/): the
// same numbers, keyed by samples trained (step * train_batch_size) as DeepSpeed
// keys its scalars. Only rank 0 writes; elsewhere it does nothing.
//
// Record key -> scalar tag:
//   loss -> Train/Samples/train_loss     val_loss -> Train/Samples/eval_loss
//   lr -> Train/Samples/lr               loss_scale -> Train/Samples/loss_scale (fp16)
//   tokens_per_s -> Train/Samples/tokens_per_s   grad_norm -> Train/Samples/grad_norm
//   tflops, mfu (train_flops.h), images_per_s, test_accuracy (--task digits)
//     -> Train/Samples/<key>
//   param_bytes, grad_bytes, optimizer_bytes, buffer_bytes, peak_rss_bytes
//     -> Memory/Samples/<key>
// Not thread-safe; owned by the training loop.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/runtime/config.h"
#include "tessera/runtime/monitor/monitor_fanout.h"

namespace tessera::cli {

// The scalars of one record, each at step `record.step * samples_per_step`.
std::vector<runtime::MonitorEvent> monitor_events(const nlohmann::json& record,
                                                  int64_t samples_per_step);

class TrainMonitor {
 public:
  // Creates the enabled monitors' files under each section's output_path/job_name
  // (out_dir for an empty output_path); cfg's batch must be resolved.
  TrainMonitor(const runtime::Config& cfg, const std::string& out_dir, int rank);
  // Writes the record's scalars and flushes, so TensorBoard shows them live.
  void write(const nlohmann::json& record);

 private:
  std::unique_ptr<runtime::MonitorFanout> monitor_;
  int64_t samples_per_step_;
};

}  // namespace tessera::cli
