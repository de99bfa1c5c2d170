#include "tessera/cli/commands/train_monitor.h"

#include <utility>

namespace tessera::cli {
namespace {

const std::vector<std::pair<const char*, const char*>>& tags() {
  static const std::vector<std::pair<const char*, const char*>> kTags = {
      {"loss", "Train/Samples/train_loss"},
      {"lr", "Train/Samples/lr"},
      {"loss_scale", "Train/Samples/loss_scale"},
      {"val_loss", "Train/Samples/eval_loss"},
      {"tokens_per_s", "Train/Samples/tokens_per_s"},
      {"tflops", "Train/Samples/tflops"},  // per rank (train_flops.h)
      {"mfu", "Train/Samples/mfu"},
      {"images_per_s", "Train/Samples/images_per_s"},  // --task digits
      {"test_accuracy", "Train/Samples/test_accuracy"},
      {"grad_norm", "Train/Samples/grad_norm"},
      {"param_bytes", "Memory/Samples/param_bytes"},
      {"grad_bytes", "Memory/Samples/grad_bytes"},
      {"optimizer_bytes", "Memory/Samples/optimizer_bytes"},
      {"buffer_bytes", "Memory/Samples/buffer_bytes"},
      {"peak_rss_bytes", "Memory/Samples/peak_rss_bytes"},
  };
  return kTags;
}

}  // namespace

std::vector<runtime::MonitorEvent> monitor_events(const nlohmann::json& record,
                                                  int64_t samples_per_step) {
  std::vector<runtime::MonitorEvent> events;
  auto step = record.find("step");
  if (step == record.end() || !step->is_number_integer()) return events;
  const int64_t samples = step->get<int64_t>() * samples_per_step;
  for (const auto& [key, tag] : tags()) {
    auto it = record.find(key);
    if (it != record.end() && it->is_number()) events.push_back({tag, it->get<double>(), samples});
  }
  return events;
}

TrainMonitor::TrainMonitor(const runtime::Config& cfg, const std::string& out_dir, int rank)
    : monitor_(runtime::make_monitor(cfg.monitor, rank, out_dir)),
      samples_per_step_(cfg.train_batch_size) {}

void TrainMonitor::write(const nlohmann::json& record) {
  if (monitor_->empty()) return;
  monitor_->write_events(monitor_events(record, samples_per_step_));
  monitor_->flush();
}

}  // namespace tessera::cli
