#include "tessera/runtime/profiling/flops_profiler_config.h"

#include "tessera/core/check.h"
#include "tessera/runtime/config.h"

namespace tessera::runtime {

void parse_flops_profiler(const nlohmann::json& j, FlopsProfilerConfig& c) {
  if (!j.contains("flops_profiler")) return;
  const nlohmann::json& f = j["flops_profiler"];
  const std::string w = "flops_profiler";
  check_known_keys(
      f, {"enabled", "profile_step", "module_depth", "top_modules", "detailed", "output_file"}, w);
  c.enabled = read_bool(f, "enabled", w, c.enabled);
  c.profile_step = read_positive_int(f, "profile_step", w, c.profile_step);
  c.module_depth = read_int(f, "module_depth", w, c.module_depth);
  TS_CHECK_T(ConfigError, c.module_depth >= -1,
             "config 'flops_profiler.module_depth' must be "
             ">= 0, or -1 for every level; got ",
             c.module_depth);
  c.top_modules = read_int(f, "top_modules", w, c.top_modules);
  TS_CHECK_T(ConfigError, c.top_modules >= 0,
             "config 'flops_profiler.top_modules' must be >= 0, "
             "got ",
             c.top_modules);
  c.detailed = read_bool(f, "detailed", w, c.detailed);
  // DeepSpeed writes null for standard output.
  if (!(f.contains("output_file") && f["output_file"].is_null())) {
    c.output_file = read_string(f, "output_file", w, c.output_file);
  }
}

}  // namespace tessera::runtime
