#include "tessera/runtime/monitor/monitor_config.h"

#include <filesystem>

#include "tessera/core/check.h"
#include "tessera/runtime/config.h"

namespace tessera::runtime {
namespace {

void parse_section(const nlohmann::json& j, const std::string& key, MonitorSectionConfig& c) {
  if (!j.contains(key)) return;
  const nlohmann::json& s = j.at(key);
  check_known_keys(s, {"enabled", "output_path", "job_name"}, key);
  c.enabled = read_bool(s, "enabled", key, c.enabled);
  c.output_path = read_string(s, "output_path", key, c.output_path);
  c.job_name = read_string(s, "job_name", key, c.job_name);
  // An empty job name would put two monitors' files, or two jobs', in one directory.
  TS_CHECK_T(ConfigError, !c.job_name.empty(), "config key '", key,
             ".job_name' must not be empty: it names the subdirectory of output_path the ", key,
             " files go to (e.g. \"gpt_small\")");
}

}  // namespace

std::string MonitorSectionConfig::log_dir(const std::string& default_dir) const {
  const std::string base = output_path.empty() ? default_dir : output_path;
  return (std::filesystem::path(base.empty() ? "." : base) / job_name).string();
}

void parse_monitor_config(const nlohmann::json& j, MonitorConfig& c) {
  parse_section(j, "tensorboard", c.tensorboard);
  parse_section(j, "csv_monitor", c.csv_monitor);
}

}  // namespace tessera::runtime
