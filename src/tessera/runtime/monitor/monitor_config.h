// MonitorConfig: DeepSpeed's "tensorboard" and "csv_monitor" config sections.
//
//   "tensorboard": {"enabled": true, "output_path": "logs/", "job_name": "gpt_small"}
//   "csv_monitor": {"enabled": true, "output_path": "logs/", "job_name": "gpt_small"}
//
// Each monitor writes into output_path/job_name (DeepSpeed's layout). An empty
// output_path means "the caller's default directory": `tessera train` uses its
// out_dir, make_monitor() callers pass their own (the current directory if none).
// Parsed strictly like the rest of the config (unknown key -> ConfigError with the
// closest known key). Plain values.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tessera::runtime {

struct MonitorSectionConfig {
  bool enabled = false;
  std::string output_path;           // "": the caller's default directory
  std::string job_name = "tessera";  // a subdirectory of output_path; not empty

  // output_path/job_name, with `default_dir` standing in for an empty output_path.
  std::string log_dir(const std::string& default_dir) const;
};

struct MonitorConfig {
  MonitorSectionConfig tensorboard;
  MonitorSectionConfig csv_monitor;
  bool enabled() const { return tensorboard.enabled || csv_monitor.enabled; }
};

// Reads the "tensorboard" and "csv_monitor" sections of the top-level config
// object `j` (either may be absent); ConfigError naming the key on a bad value.
void parse_monitor_config(const nlohmann::json& j, MonitorConfig& c);

}  // namespace tessera::runtime
