#include "tessera/runtime/monitor/csv_monitor.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "tessera/core/check.h"

namespace tessera::runtime {
namespace {

// Python's csv.QUOTE_MINIMAL: quote a field holding the delimiter, a quote or a
// line break, doubling the quotes inside.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

}  // namespace

CsvMonitor::CsvMonitor(std::string log_dir) : log_dir_(std::move(log_dir)) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir_, ec);
  TS_CHECK(!ec, "cannot create the csv_monitor directory '", log_dir_, "': ", ec.message(),
           "; set csv_monitor.output_path to a writable directory");
}

std::string CsvMonitor::file_name(const std::string& tag) {
  std::string name = tag;
  for (char& c : name) {
    if (c == '/' || c == ' ') c = '_';
  }
  return name + ".csv";
}

std::string CsvMonitor::format_value(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Shortest round-trip digits as d.ddde±x, then laid out by Python's repr rules:
  // positional for exponents in [-4, 16), with ".0" on integers; else scientific.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  const int exp = std::atoi(sci.c_str() + e + 1);
  std::string out = negative ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char tail[16];
    std::snprintf(tail, sizeof(tail), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + tail;
  }
  if (exp < 0) return out + "0." + std::string(-exp - 1, '0') + digits;
  const size_t int_len = static_cast<size_t>(exp) + 1;
  if (digits.size() <= int_len)
    return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

MonitorFile& CsvMonitor::file_for(const std::string& tag) {
  const std::string name = file_name(tag);
  auto it = files_.find(name);
  if (it != files_.end()) return it->second;
  MonitorFile file((std::filesystem::path(log_dir_) / name).string());
  if (file.initial_size() == 0) {
    const size_t slash = tag.rfind('/');
    file.write("step," + csv_field(slash == std::string::npos ? tag : tag.substr(slash + 1)) +
               "\r\n");
  }
  return files_.emplace(name, std::move(file)).first->second;
}

void CsvMonitor::write_events(const std::vector<MonitorEvent>& events) {
  for (const MonitorEvent& e : events) {
    TS_CHECK(!e.tag.empty(), "csv_monitor: an event has an empty tag; give every scalar a name");
    file_for(e.tag).write(std::to_string(e.step) + "," + format_value(e.value) + "\r\n");
  }
}

void CsvMonitor::flush() {
  for (auto& [name, file] : files_) file.flush();
}

}  // namespace tessera::runtime
