#include "tessera/runtime/profiling/profile_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace tessera::runtime::profiling {
namespace {

std::string percent(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

std::string millis(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f ms", seconds * 1e3);
  return buf;
}

std::string label(const ModuleProfile& m) { return m.name.empty() ? "(" + m.type + ")" : m.name; }

// The `n` modules with the largest own `key` (the root's own share included:
// the work its forward does outside any submodule).
template <typename Key>
std::string top(const std::vector<ModuleProfile>& modules, int64_t n, Key key, bool time,
                double whole) {
  std::vector<size_t> order(modules.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return key(modules[a]) > key(modules[b]); });
  std::string out;
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(order.size()); ++i) {
    const ModuleProfile& m = modules[order[static_cast<size_t>(i)]];
    if (key(m) <= 0) break;
    out += "    " + label(m) + (m.name.empty() ? "" : " (" + m.type + ")") + ": " +
           (time ? millis(key(m)) : si(key(m), "FLOPs")) + ", " + percent(key(m), whole) + "\n";
  }
  return out.empty() ? "    (none)\n" : out;
}

}  // namespace

std::string si(double value, const std::string& unit) {
  static const char* const kPrefix[] = {"", "k", "M", "G", "T", "P"};
  int p = 0;
  while (std::fabs(value) >= 1000.0 && p < 5) {
    value /= 1000.0;
    ++p;
  }
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.3g %s", value, kPrefix[p]);
  std::string s = buf;
  if (unit.empty() && s.back() == ' ') s.pop_back();
  return s + unit;
}

std::string format_profile(const std::vector<ModuleProfile>& modules,
                           const ProfileReportOptions& o) {
  std::string out = o.title.empty() ? "flops profile\n" : o.title + "\n";
  if (modules.empty()) {
    return out + "  no forward was observed: the model marks no ModuleScope, or none ran\n";
  }
  const ModuleProfile& root = modules[0];
  const double flops_per_s = root.seconds > 0 ? root.flops / root.seconds : 0;
  out += "  params " + si(static_cast<double>(root.params)) + " | forward " +
         si(root.flops, "FLOPs") + " (matmuls, counted from shapes) | " + millis(root.seconds) +
         " | " + si(flops_per_s, "FLOP/s") + "\n";
  const int64_t n = std::max<int64_t>(o.top_modules, 0);
  if (n > 0) {
    out += "  top " + std::to_string(n) + " by own FLOPs (submodules excluded):\n";
    out += top(
        modules, n, [](const ModuleProfile& m) { return m.self_flops; }, false, root.flops);
    out += "  top " + std::to_string(n) + " by own time:\n";
    out += top(
        modules, n, [](const ModuleProfile& m) { return m.self_seconds; }, true, root.seconds);
  }
  if (!o.detailed) return out;
  char line[256];
  std::snprintf(line, sizeof(line), "  %-36s %-20s %10s %14s %7s %12s %7s\n", "module", "type",
                "params", "FLOPs", "%FLOPs", "time", "%time");
  out += line;
  for (const ModuleProfile& m : modules) {
    if (o.module_depth >= 0 && m.depth > o.module_depth) continue;
    // Dropouts and other modules with nothing to show would only add lines.
    if (m.depth > 0 && m.params == 0 && m.flops == 0 && m.seconds == 0) continue;
    const std::string name = std::string(static_cast<size_t>(2 * m.depth), ' ') + label(m);
    std::snprintf(line, sizeof(line), "  %-36s %-20s %10s %14s %7s %12s %7s\n", name.c_str(),
                  m.type.c_str(), si(static_cast<double>(m.params)).c_str(),
                  si(m.flops, "FLOPs").c_str(), percent(m.flops, root.flops).c_str(),
                  millis(m.seconds).c_str(), percent(m.seconds, root.seconds).c_str());
    out += line;
  }
  return out;
}

}  // namespace tessera::runtime::profiling
