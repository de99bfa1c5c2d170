// DeepSpeed's "flops_profiler" config section, with its key names and defaults:
//
//   "flops_profiler": {"enabled": true, "profile_step": 5, "module_depth": -1,
//                      "top_modules": 1, "detailed": true, "output_file": null}
//
// At global step profile_step, `tessera train`'s rank 0 profiles one forward
// (flops_profiler.h) and prints the per-module table, or writes it to
// output_file. A plain value; parsed strictly like the rest of the config.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace tessera::runtime {

struct FlopsProfilerConfig {
  bool enabled = false;
  int64_t profile_step = 1;   // the global step (1-based) whose first forward is profiled
  int64_t module_depth = -1;  // deepest module level in the table; -1: all
  int64_t top_modules = 1;    // modules listed by their own FLOPs and time
  bool detailed = true;       // print the per-module table (false: summary and top modules)
  std::string output_file;    // "" (or null): standard output
};

// Reads j["flops_profiler"] when present; ConfigError naming the key for an
// unknown key, a wrong type or a value out of range.
void parse_flops_profiler(const nlohmann::json& j, FlopsProfilerConfig& c);

}  // namespace tessera::runtime
