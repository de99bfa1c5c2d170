// Text for the flops profiler's report (flops_profiler.h) and for FLOP/s in
// `tessera train`'s log lines: numbers with SI prefixes and the per-module table.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "tessera/runtime/profiling/flops_profiler.h"

namespace tessera::runtime::profiling {

// 1234567 -> "1.23 M" (k, M, G, T, P), three significant digits; unit appended.
std::string si(double value, const std::string& unit = "");

// The report FlopsProfiler::report() returns for `modules` (pre-order, [0] the root).
std::string format_profile(const std::vector<ModuleProfile>& modules,
                           const ProfileReportOptions& options);

}  // namespace tessera::runtime::profiling
