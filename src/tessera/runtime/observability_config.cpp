#include "tessera/runtime/observability_config.h"

#include "tessera/core/check.h"
#include "tessera/core/error.h"

namespace tessera::runtime {

void parse_observability(const nlohmann::json& j, TimelineConfig& timeline,
                         CommsLoggerConfig& comms_logger, StallConfig& stall) {
  for (const char* key : {"stall_check_time_seconds", "stall_shutdown_time_seconds"}) {
    if (!j.contains(key)) continue;
    const double v = read_number(j, key, "", -1);
    TS_CHECK_T(ConfigError, v >= 0, "config key '", key, "' must be >= 0 seconds (0: off), got ", v);
    (std::string(key) == "stall_check_time_seconds" ? stall.check_time_seconds
                                                    : stall.shutdown_time_seconds) = v;
  }
  if (j.contains("timeline")) {
    const auto& t = j["timeline"];
    check_known_keys(t, {"enabled", "output_path"}, "timeline");
    timeline.enabled = read_bool(t, "enabled", "timeline", true);
    timeline.output_path = read_string(t, "output_path", "timeline", "");
  }
  if (j.contains("comms_logger")) {
    const auto& c = j["comms_logger"];
    check_known_keys(c, {"enabled", "verbose", "prof_all", "prof_ops", "debug"}, "comms_logger");
    comms_logger.enabled = read_bool(c, "enabled", "comms_logger", false);
    comms_logger.verbose = read_bool(c, "verbose", "comms_logger", false);
    comms_logger.prof_all = read_bool(c, "prof_all", "comms_logger", true);
    read_bool(c, "debug", "comms_logger", false);  // DeepSpeed's; names the caller there
    if (c.contains("prof_ops")) {
      const auto& ops = c["prof_ops"];
      TS_CHECK_T(ConfigError, ops.is_array(), "config 'comms_logger.prof_ops' must be a list of "
                 "operation names such as [\"all_reduce\", \"all_gather\"], got ", ops.dump());
      comms_logger.prof_ops.clear();
      for (const auto& op : ops) {
        TS_CHECK_T(ConfigError, op.is_string(), "config 'comms_logger.prof_ops' holds ", op.dump(),
                   "; each entry must be an operation name such as \"all_reduce\"");
        comms_logger.prof_ops.push_back(op.get<std::string>());
      }
      static const char* kOps[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter",
                                   "all_to_all", "barrier",   "send",       "recv"};
      for (const auto& name : comms_logger.prof_ops) {
        bool known = false;
        for (const char* k : kOps) known = known || name == k;
        TS_CHECK_T(ConfigError, known, "config 'comms_logger.prof_ops' names '", name,
                   "'; use all_reduce, broadcast, all_gather, reduce_scatter, all_to_all, "
                   "barrier, send or recv");
      }
    }
  }
}

}  // namespace tessera::runtime
