#include "tessera/comm/slurm_env.h"

#include <cctype>

#include "tessera/core/check.h"
#include "tessera/core/env.h"

namespace tessera::comm {
namespace {

// The top-level items of `list`: commas inside brackets do not split.
std::vector<std::string> split_items(const std::string& list) {
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    TS_CHECK_T(ConfigError, depth >= 0 && depth <= 1, "Slurm host list '", list,
               "' has unbalanced or nested brackets");
    if (c == ',' && depth == 0) {
      if (!cur.empty()) items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  TS_CHECK_T(ConfigError, depth == 0, "Slurm host list '", list, "' has an unclosed '['");
  if (!cur.empty()) items.push_back(cur);
  return items;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "01-03,7" -> {"01", "02", "03", "7"}.
std::vector<std::string> expand_ranges(const std::string& ranges, const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= ranges.size()) {
    size_t comma = ranges.find(',', start);
    if (comma == std::string::npos) comma = ranges.size();
    const std::string part = ranges.substr(start, comma - start);
    const size_t dash = part.find('-');
    const std::string lo = part.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : part.substr(dash + 1);
    TS_CHECK_T(ConfigError, all_digits(lo) && all_digits(hi) && lo.size() <= 9 && hi.size() <= 9,
               "Slurm host list '", list, "': '", part, "' is not a number or a range LO-HI");
    const long a = std::stol(lo);
    const long b = std::stol(hi);
    TS_CHECK_T(ConfigError, a <= b, "Slurm host list '", list, "': range '", part,
               "' runs backwards");
    TS_CHECK_T(ConfigError, b - a < 100000, "Slurm host list '", list, "': range '", part,
               "' names more than 100000 hosts");
    for (long v = a; v <= b; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      out.push_back(digits);
    }
    start = comma + 1;
  }
  return out;
}

void expand_item(const std::string& item, const std::string& list, std::vector<std::string>& out) {
  const size_t open = item.find('[');
  if (open == std::string::npos) {
    out.push_back(item);
    return;
  }
  const size_t close = item.find(']', open);
  const std::string prefix = item.substr(0, open);
  const std::string rest = item.substr(close + 1);
  for (const std::string& n : expand_ranges(item.substr(open + 1, close - open - 1), list)) {
    expand_item(prefix + n + rest, list, out);
  }
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(const std::string& list) {
  std::vector<std::string> hosts;
  for (const std::string& item : split_items(list)) expand_item(item, list, hosts);
  return hosts;
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& list) {
  std::vector<int> counts;
  size_t start = 0;
  while (start < list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    const std::string item = list.substr(start, comma - start);
    const size_t paren = item.find("(x");
    const std::string count = item.substr(0, paren);
    std::string repeat = "1";
    if (paren != std::string::npos) {
      TS_CHECK_T(ConfigError, item.back() == ')', "Slurm tasks-per-node list '", list, "': '",
                 item, "' should read N or N(xM)");
      repeat = item.substr(paren + 2, item.size() - paren - 3);
    }
    TS_CHECK_T(ConfigError, all_digits(count) && all_digits(repeat) && count.size() <= 6 &&
                                repeat.size() <= 6,
               "Slurm tasks-per-node list '", list, "': '", item, "' should read N or N(xM)");
    for (int i = 0; i < std::stoi(repeat); ++i) counts.push_back(std::stoi(count));
    start = comma + 1;
  }
  return counts;
}

int slurm_tasks_on_node(int node, int fallback) {
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (auto list = env::get(name)) {
      const std::vector<int> counts = expand_slurm_tasks_per_node(*list);
      TS_CHECK_T(ConfigError, node >= 0 && node < static_cast<int>(counts.size()), name, "='",
                 *list, "' has no entry for node ", node, " (SLURM_NODEID)");
      return counts[static_cast<size_t>(node)];
    }
  }
  if (auto n = env::get("SLURM_NTASKS_PER_NODE")) return expand_slurm_tasks_per_node(*n).front();
  return fallback;
}

std::string slurm_first_node() {
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    if (auto list = env::get(name)) {
      auto hosts = expand_slurm_hostlist(*list);
      if (!hosts.empty()) return hosts.front();
    }
  }
  return "";
}

int slurm_store_port(int step) {
  const long long job = env::get("SLURM_JOB_ID") ? env::get_int("SLURM_JOB_ID") : 0;
  const long long s = step >= 0 ? step : env::get("SLURM_STEP_ID") ? env::get_int("SLURM_STEP_ID") : 0;
  return 20000 + static_cast<int>(((job * 64 + s) % 20000 + 20000) % 20000);
}

}  // namespace tessera::comm
