#include "tessera/cli/launcher/hostfile.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "tessera/core/check.h"

namespace tessera::cli {
namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

bool valid_host(const std::string& h) {
  if (h.empty()) return false;
  for (char c : h) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ||
                    c == '_' || c == '@' || c == ':' || c == '[' || c == ']';
    if (!ok) return false;
  }
  return h[0] != '-';
}

// A slot count: the whole string, 1..4096.
int parse_count(const std::string& s, const std::string& where) {
  char* end = nullptr;
  long v = s.empty() ? 0 : std::strtol(s.c_str(), &end, 10);
  TS_CHECK_T(ConfigError, !s.empty() && *end == '\0' && v >= 1 && v <= 4096, where,
             ": the slot count must be a number from 1 to 4096, got '", s, "'");
  return static_cast<int>(v);
}

HostSlots make_host(const std::string& host, int slots, const std::string& where) {
  TS_CHECK_T(ConfigError, valid_host(host), where, ": '", host, "' is not a host name");
  HostSlots h;
  h.host = host;
  for (int i = 0; i < slots; ++i) h.slots.push_back(i);
  return h;
}

void add_unique(std::vector<HostSlots>& hosts, HostSlots h, const std::string& where) {
  for (const auto& other : hosts) {
    TS_CHECK_T(ConfigError, other.host != h.host, where, ": host '", h.host,
               "' is listed twice");
  }
  hosts.push_back(std::move(h));
}

// "host1:0,2@host2" -> host -> slot indices (empty set: every slot).
std::map<std::string, std::set<int>> parse_filter(const std::string& spec, const char* flag) {
  std::map<std::string, std::set<int>> out;
  std::stringstream parts(spec);
  for (std::string part; std::getline(parts, part, '@');) {
    part = trim(part);
    TS_CHECK_T(ConfigError, !part.empty(), flag, " '", spec, "': an empty host entry");
    const auto colon = part.find(':');
    const std::string host = part.substr(0, colon);
    std::set<int>& slots = out[host];
    if (colon == std::string::npos) continue;
    std::stringstream list(part.substr(colon + 1));
    for (std::string s; std::getline(list, s, ',');) {
      char* end = nullptr;
      long v = s.empty() ? -1 : std::strtol(s.c_str(), &end, 10);
      TS_CHECK_T(ConfigError, !s.empty() && *end == '\0' && v >= 0, flag, " '", spec,
                 "': slot '", s, "' of host ", host, " is not a slot index");
      slots.insert(static_cast<int>(v));
    }
  }
  return out;
}

}  // namespace

std::vector<HostSlots> parse_hostfile(const std::string& text, const std::string& source) {
  std::vector<HostSlots> hosts;
  std::istringstream in(text);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    const std::string where = source + ":" + std::to_string(line_no);
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::istringstream words(line);
    std::string first, second, extra;
    words >> first >> second >> extra;
    TS_CHECK_T(ConfigError, extra.empty(), where, ": expected 'HOST slots=N' or 'HOST:N', got '",
               line, "'");
    if (!second.empty()) {  // DeepSpeed: host slots=N
      TS_CHECK_T(ConfigError, second.rfind("slots=", 0) == 0, where,
                 ": expected 'HOST slots=N' or 'HOST:N', got '", line, "'");
      add_unique(hosts, make_host(first, parse_count(second.substr(6), where), where), where);
    } else if (const auto colon = first.rfind(':');
               colon != std::string::npos && first.find(']') == std::string::npos) {
      add_unique(hosts,
                 make_host(first.substr(0, colon), parse_count(first.substr(colon + 1), where),
                           where),
                 where);
    } else {
      add_unique(hosts, make_host(first, 1, where), where);  // a bare host: one slot
    }
  }
  TS_CHECK_T(ConfigError, !hosts.empty(), source, " lists no hosts");
  return hosts;
}

std::vector<HostSlots> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  TS_CHECK_T(ConfigError, in.good(), "cannot read the hostfile ", path,
             " (check the path given to --hostfile)");
  std::stringstream text;
  text << in.rdbuf();
  return parse_hostfile(text.str(), path);
}

std::vector<HostSlots> parse_host_list(const std::string& list) {
  std::vector<HostSlots> hosts;
  std::stringstream parts(list);
  for (std::string part; std::getline(parts, part, ',');) {
    part = trim(part);
    const std::string where = "-H '" + list + "'";
    TS_CHECK_T(ConfigError, !part.empty(), where, ": an empty host entry");
    const auto colon = part.rfind(':');
    if (colon == std::string::npos) {
      add_unique(hosts, make_host(part, 1, where), where);
    } else {
      add_unique(hosts,
                 make_host(part.substr(0, colon), parse_count(part.substr(colon + 1), where),
                           where),
                 where);
    }
  }
  TS_CHECK_T(ConfigError, !hosts.empty(), "-H '", list, "' lists no hosts");
  return hosts;
}

std::vector<HostSlots> select_hosts(std::vector<HostSlots> hosts, const HostSelection& sel) {
  TS_CHECK_T(ConfigError, sel.include.empty() || sel.exclude.empty(),
             "--include and --exclude cannot be used together");
  auto check_known = [&](const std::map<std::string, std::set<int>>& filter, const char* flag) {
    for (const auto& [host, slots] : filter) {
      auto it = std::find_if(hosts.begin(), hosts.end(),
                             [&](const HostSlots& h) { return h.host == host; });
      TS_CHECK_T(ConfigError, it != hosts.end(), flag, ": host '", host,
                 "' is not in the host list");
      for (int s : slots) {
        TS_CHECK_T(ConfigError, std::count(it->slots.begin(), it->slots.end(), s) == 1, flag,
                   ": host '", host, "' has no slot ", s, " (it has ", it->slots.size(), ")");
      }
    }
  };
  // --include keeps the hosts (and slots) it names; --exclude drops them.
  auto apply = [&](const std::string& spec, const char* flag, bool include) {
    const auto filter = parse_filter(spec, flag);
    check_known(filter, flag);
    std::vector<HostSlots> kept;
    for (auto& h : hosts) {
      auto it = filter.find(h.host);
      const bool listed = it != filter.end();
      if (listed != include && (include || it->second.empty())) continue;
      if (listed && !it->second.empty()) {
        std::vector<int> slots;
        for (int s : h.slots) {
          if ((it->second.count(s) != 0) == include) slots.push_back(s);
        }
        h.slots = slots;
        if (h.slots.empty()) continue;
      }
      kept.push_back(h);
    }
    hosts = kept;
  };
  if (!sel.include.empty()) apply(sel.include, "--include", true);
  if (!sel.exclude.empty()) apply(sel.exclude, "--exclude", false);
  if (sel.num_nodes > 0) {
    TS_CHECK_T(ConfigError, static_cast<size_t>(sel.num_nodes) <= hosts.size(), "--num-nodes ",
               sel.num_nodes, " asks for more hosts than the ", hosts.size(), " available");
    hosts.resize(static_cast<size_t>(sel.num_nodes));
  }
  if (sel.procs_per_node > 0) {
    for (auto& h : hosts) {
      TS_CHECK_T(ConfigError, static_cast<size_t>(sel.procs_per_node) <= h.slots.size(),
                 "--num-procs-per-node ", sel.procs_per_node, ": host '", h.host, "' has only ",
                 h.slots.size(), " slots");
      h.slots.resize(static_cast<size_t>(sel.procs_per_node));
    }
  }
  TS_CHECK_T(ConfigError, !hosts.empty(), "no host is left after --include/--exclude");
  for (const auto& h : hosts) {
    const size_t want = hosts.front().slots.size();
    TS_CHECK_T(ConfigError, h.slots.size() == want, "host '", h.host, "' has ", h.slots.size(),
               " slots but host '", hosts.front().host, "' has ", want,
               "; every host runs the same number of workers (pass --num-procs-per-node ",
               std::min(want, h.slots.size()), " or fix the hostfile)");
  }
  return hosts;
}

}  // namespace tessera::cli
